//! The sentence model's dense layers (`y = x·Wᵀ + b`) as a matrix product of our own, for
//! the few rows a prompt has.
//!
//! A prompt is about fifteen tokens. The general matrix product candle calls repacks the
//! whole weight matrix on every call, and at fifteen rows that repacking was most of a
//! prompt's embedding (46% of the time in the packing loop, 25% in the product itself).
//! Here the weights are packed once, when the model loads, in strips of [`STRIP`] output
//! columns, each strip the input width long and contiguous: a strip stays in the first or
//! second level cache while every row of the input goes through it, so each call reads the
//! weights once, in order. Where the processor converts half-precision floats (F16C, with
//! AVX2 and FMA) the strips are stored in half precision, which halves what a call reads:
//! the weights of all-MiniLM-L6-v2 then fit in a 32 MB cache (21 MB against 42 MB).
//!
//! Where the processor has AVX-512 with its bfloat16 dot product (AVX512-BF16: AMD Zen 4,
//! Intel Cooper Lake and Sapphire Rapids on), the weights are stored as pairs of bfloat16
//! and each row's inputs rounded to bfloat16 too: one instruction adds two inputs times
//! their weights for sixteen outputs, in single precision. Measured on one core of an AMD
//! EPYC (Zen 4), 200 prompts: a prompt's embedding p50 11.3-11.8 ms with candle's product,
//! 6.4-8.4 ms with half-precision weights, 4.4-4.7 ms in bfloat16; a batch of memories 167,
//! 168-178 and 243-252 texts/s. A product with at least [`ROWS_PER_THREAD`] rows per thread
//! (a batch of memories, never a prompt) is split by rows over the threads candle would use
//! (`RAYON_NUM_THREADS`, else every core).
//!
//! Invariants: the result is the product to within float rounding, with the weights
//! rounded to half precision on processors that have F16C (eleven significant bits, and
//! half's range: a weight beyond ±65504 would become infinite, none of a sentence model's
//! is), or weights and inputs rounded to bfloat16 (eight significant bits, single
//! precision's range) on processors that have AVX512-BF16; the model's vectors agree with
//! the reference implementation's to cosine ≥ 0.99999 in half precision and ≥ 0.99995 in
//! bfloat16 (the worst of the reference texts; the model's test asks ≥ 0.9999). The code
//! built for those instructions runs only with a [`Fast`] or a [`Pairs`], which only their
//! detection at run time makes, and plain Rust runs everywhere else.

/// Output columns per strip: two vector registers of eight floats.
const STRIP: usize = 16;

/// The fewest rows of a product given a thread of their own.
const ROWS_PER_THREAD: usize = 32;

/// Proof that this processor has AVX2, FMA and F16C: made only by [`Fast::detect`].
#[derive(Debug, Clone, Copy)]
struct Fast(());

impl Fast {
    fn detect() -> Option<Fast> {
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx2")
            && std::arch::is_x86_feature_detected!("fma")
            && std::arch::is_x86_feature_detected!("f16c")
        {
            return Some(Fast(()));
        }
        None
    }
}

/// Proof that this processor has AVX-512 with its bfloat16 dot products (AVX512-BF16):
/// made only by [`Pairs::detect`].
#[derive(Debug, Clone, Copy)]
struct Pairs(());

impl Pairs {
    fn detect() -> Option<Pairs> {
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("avx512bf16")
        {
            return Some(Pairs(()));
        }
        None
    }
}

/// The arithmetic a layer's product runs in, the fastest this processor has.
#[derive(Debug, Clone, Copy)]
enum Arith {
    /// Weights and inputs in bfloat16, summed in single precision, by AVX-512.
    Bf16(Pairs),
    /// Weights in half precision, inputs and sums in single, by AVX2 and FMA.
    Half(Fast),
    /// Single precision, plain Rust.
    Single,
}

impl Arith {
    fn detect() -> Arith {
        match (Pairs::detect(), Fast::detect()) {
            (Some(pairs), _) => Arith::Bf16(pairs),
            (None, Some(fast)) => Arith::Half(fast),
            (None, None) => Arith::Single,
        }
    }
}

/// A dense layer with its weights packed for [`Dense::product`].
#[derive(Debug)]
pub struct Dense {
    inputs: usize,
    outputs: usize,
    weights: Strips,
    bias: Vec<f32>,
}

/// Strip `s` holds, for each input `i` in order, the weights of outputs `s·STRIP..` (zeros
/// past the last output); in bfloat16, for each pair of inputs `2p, 2p + 1` in order, the
/// pairs of weights of those outputs, the first input's in the low half (an odd last
/// input paired with a zero).
#[derive(Debug)]
enum Strips {
    /// Bfloat16 pairs, run by the AVX-512 code.
    Bf16(Vec<u32>, Pairs),
    /// Half-precision bits, run by the vector code.
    Half(Vec<u16>, Fast),
    Single(Vec<f32>),
}

impl Dense {
    /// Packs a layer stored as PyTorch stores it: `weight` is `outputs` rows of `inputs`.
    ///
    /// # Panics
    /// If `inputs` is zero, `weight` is not `outputs × inputs` long or `bias` not `outputs`
    /// long.
    pub fn new(weight: &[f32], bias: &[f32], inputs: usize, outputs: usize) -> Dense {
        Dense::packed(weight, bias, inputs, outputs, Arith::detect())
    }

    fn packed(weight: &[f32], bias: &[f32], inputs: usize, outputs: usize, arith: Arith) -> Dense {
        assert!(inputs > 0, "a layer with no input");
        assert_eq!(
            weight.len(),
            inputs * outputs,
            "weights of {outputs} × {inputs}"
        );
        assert_eq!(bias.len(), outputs, "a bias per output");
        let mut strips = vec![0f32; outputs.div_ceil(STRIP) * inputs * STRIP];
        for (o, row) in weight.chunks_exact(inputs).enumerate() {
            let (s, j) = (o / STRIP, o % STRIP);
            for (i, w) in row.iter().enumerate() {
                strips[(s * inputs + i) * STRIP + j] = *w;
            }
        }
        Dense {
            inputs,
            outputs,
            weights: match arith {
                Arith::Bf16(pairs) => Strips::Bf16(bf16_pairs(&strips, inputs), pairs),
                Arith::Half(fast) => Strips::Half(simd::to_half(&strips, fast), fast),
                Arith::Single => Strips::Single(strips),
            },
            bias: bias.to_vec(),
        }
    }

    pub fn inputs(&self) -> usize {
        self.inputs
    }

    pub fn outputs(&self) -> usize {
        self.outputs
    }

    /// `x` is rows of [`Dense::inputs`] floats; returns as many rows of
    /// [`Dense::outputs`].
    ///
    /// # Panics
    /// If `x` is not a whole number of rows.
    pub fn product(&self, x: &[f32]) -> Vec<f32> {
        assert!(
            x.len().is_multiple_of(self.inputs),
            "rows of {} inputs",
            self.inputs
        );
        let rows = x.len() / self.inputs;
        let mut out = vec![0f32; rows * self.outputs];
        let threads = threads().min(rows / ROWS_PER_THREAD).max(1);
        if threads == 1 {
            self.rows(x, &mut out);
        } else {
            let per = rows.div_ceil(threads);
            std::thread::scope(|scope| {
                let parts = x
                    .chunks(per * self.inputs)
                    .zip(out.chunks_mut(per * self.outputs));
                for (x, out) in parts {
                    scope.spawn(move || self.rows(x, out));
                }
            });
        }
        out
    }

    /// The product of the rows of `x` into `out`, strip by strip.
    fn rows(&self, x: &[f32], out: &mut [f32]) {
        let strip_len = self.inputs * STRIP;
        match &self.weights {
            Strips::Bf16(w, pairs) => {
                let x = simd::to_bf16_rows(x, self.inputs, *pairs);
                for (s, strip) in w.chunks_exact(self.inputs.div_ceil(2) * STRIP).enumerate() {
                    simd::strip_bf16(self, &x, s, strip, out, *pairs);
                }
            }
            Strips::Half(h, fast) => {
                for (s, strip) in h.chunks_exact(strip_len).enumerate() {
                    simd::strip(self, x, s, strip, out, *fast);
                }
            }
            Strips::Single(w) => {
                for (s, strip) in w.chunks_exact(strip_len).enumerate() {
                    self.strip_plain(x, s, strip, out);
                }
            }
        }
    }

    fn strip_plain(&self, x: &[f32], s: usize, strip: &[f32], out: &mut [f32]) {
        for (r, input) in x.chunks_exact(self.inputs).enumerate() {
            let mut acc = [0f32; STRIP];
            for (a, w) in input.iter().zip(strip.chunks_exact(STRIP)) {
                for (c, w) in acc.iter_mut().zip(w) {
                    *c += a * w;
                }
            }
            self.store(r, s, &acc, out);
        }
    }

    /// Row `r` of the output's strip `s`: the sums plus the bias, the padding left out.
    fn store(&self, r: usize, s: usize, sums: &[f32; STRIP], out: &mut [f32]) {
        let first = s * STRIP;
        let width = STRIP.min(self.outputs - first);
        let row = &mut out[r * self.outputs + first..][..width];
        for ((o, sum), b) in row.iter_mut().zip(sums).zip(&self.bias[first..]) {
            *o = sum + b;
        }
    }
}

/// Strips of single-precision weights (see [`Strips`]) as strips of bfloat16 pairs.
fn bf16_pairs(strips: &[f32], inputs: usize) -> Vec<u32> {
    let pairs = inputs.div_ceil(2);
    let mut out = Vec::with_capacity(strips.len() / inputs / STRIP * pairs * STRIP);
    for strip in strips.chunks_exact(inputs * STRIP) {
        for p in 0..pairs {
            for j in 0..STRIP {
                let first = bf16(strip[2 * p * STRIP + j]);
                let second = if 2 * p + 1 < inputs {
                    bf16(strip[(2 * p + 1) * STRIP + j])
                } else {
                    0
                };
                out.push(u32::from(first) | u32::from(second) << 16);
            }
        }
    }
    out
}

/// `v` in bfloat16 (the high half of its bits), rounded to nearest, ties to even, as the
/// processor's conversion does.
fn bf16(v: f32) -> u16 {
    if v.is_nan() {
        return 0x7fc0;
    }
    let bits = v.to_bits();
    let rounded = bits.wrapping_add(0x7fff + ((bits >> 16) & 1));
    (rounded >> 16) as u16
}

/// Threads for a large product: `RAYON_NUM_THREADS` when set (the worker sets 1, leaving
/// the other cores to the hooks), else every core, as candle's product used.
fn threads() -> usize {
    static THREADS: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *THREADS.get_or_init(|| {
        std::env::var("RAYON_NUM_THREADS")
            .ok()
            .and_then(|v| v.parse().ok())
            .filter(|&n| n > 0)
            .or_else(|| std::thread::available_parallelism().ok().map(|n| n.get()))
            .unwrap_or(1)
    })
}

#[cfg(target_arch = "x86_64")]
#[allow(unsafe_code)] // the processor's vector instructions: raw-pointer loads, detected features
mod simd {
    use std::arch::x86_64::{
        __m128i, __m256, __m256bh, __m256i, __m512, __m512bh, __m512i, _mm_loadu_si128,
        _mm_storeu_si128, _mm256_cvtph_ps, _mm256_cvtps_ph, _mm256_fmadd_ps, _mm256_loadu_ps,
        _mm256_set1_ps, _mm256_setzero_ps, _mm256_storeu_ps, _mm256_storeu_si256,
        _mm512_cvtneps_pbh, _mm512_dpbf16_ps, _mm512_loadu_ps, _mm512_loadu_si512,
        _mm512_set1_epi32, _mm512_setzero_ps, _mm512_storeu_ps,
    };

    use super::{Dense, Fast, Pairs, STRIP, bf16};

    /// Input rows computed together, sharing each load of the weights: two registers per
    /// row, so four rows keep eight accumulators in registers.
    const ROWS: usize = 4;

    /// `v` (a whole number of strips) in half precision, rounded to nearest.
    pub(super) fn to_half(v: &[f32], _: Fast) -> Vec<u16> {
        assert!(v.len().is_multiple_of(8), "whole vectors of eight");
        // SAFETY: a `Fast` exists only where AVX2 and F16C were detected.
        unsafe { to_half_f16c(v) }
    }

    #[target_feature(enable = "avx2,f16c")]
    fn to_half_f16c(v: &[f32]) -> Vec<u16> {
        let mut out = vec![0u16; v.len()];
        for (o, c) in out.chunks_exact_mut(8).zip(v.chunks_exact(8)) {
            // SAFETY: `c` is eight floats to read, `o` eight halves to write.
            unsafe {
                let h = _mm256_cvtps_ph::<0>(_mm256_loadu_ps(c.as_ptr()));
                _mm_storeu_si128(o.as_mut_ptr().cast::<__m128i>(), h);
            }
        }
        out
    }

    /// Strip `s` of the product, from half-precision weights.
    pub(super) fn strip(d: &Dense, x: &[f32], s: usize, strip: &[u16], out: &mut [f32], _: Fast) {
        // SAFETY: a `Fast` exists only where AVX2, FMA and F16C were detected.
        unsafe { strip_fma(d, x, s, strip, out) }
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    fn strip_fma(d: &Dense, x: &[f32], s: usize, strip: &[u16], out: &mut [f32]) {
        let rows = x.len() / d.inputs;
        let mut r = 0;
        while r + ROWS <= rows {
            block::<ROWS>(d, x, r, s, strip, out);
            r += ROWS;
        }
        // The rows left in one block, as in `strip_avx512`.
        match rows - r {
            0 => {}
            1 => block::<1>(d, x, r, s, strip, out),
            2 => block::<2>(d, x, r, s, strip, out),
            _ => block::<3>(d, x, r, s, strip, out),
        }
    }

    /// Rows `r..r + R` of the output's strip `s`, two registers of eight per row.
    #[target_feature(enable = "avx2,fma,f16c")]
    fn block<const R: usize>(
        d: &Dense,
        x: &[f32],
        r: usize,
        s: usize,
        strip: &[u16],
        out: &mut [f32],
    ) {
        let n = d.inputs;
        let inputs: [&[f32]; R] = std::array::from_fn(|i| &x[(r + i) * n..][..n]);
        let mut acc: [[__m256; 2]; R] = [[_mm256_setzero_ps(); 2]; R];
        for (i, w) in strip.chunks_exact(STRIP).enumerate() {
            // SAFETY: `w` is STRIP = 16 halves: two loads of eight.
            let (w0, w1) = unsafe {
                (
                    _mm256_cvtph_ps(_mm_loadu_si128(w.as_ptr().cast::<__m128i>())),
                    _mm256_cvtph_ps(_mm_loadu_si128(w[8..].as_ptr().cast::<__m128i>())),
                )
            };
            for (row, input) in acc.iter_mut().zip(&inputs) {
                let a = _mm256_set1_ps(input[i]);
                row[0] = _mm256_fmadd_ps(a, w0, row[0]);
                row[1] = _mm256_fmadd_ps(a, w1, row[1]);
            }
        }
        for (i, row) in acc.iter().enumerate() {
            let mut sums = [0f32; STRIP];
            // SAFETY: `sums` is STRIP = 16 floats: two stores of eight.
            unsafe {
                _mm256_storeu_ps(sums.as_mut_ptr(), row[0]);
                _mm256_storeu_ps(sums[8..].as_mut_ptr(), row[1]);
            }
            d.store(r + i, s, &sums, out);
        }
    }

    /// Rows to blocks of bfloat16 together: eight rows keep eight accumulators.
    const BF16_ROWS: usize = 8;

    /// The rows of `x`, `inputs` long each, in bfloat16 (rounded to nearest even), each
    /// padded with a zero to an even length.
    pub(super) fn to_bf16_rows(x: &[f32], inputs: usize, _: Pairs) -> Vec<u16> {
        // SAFETY: a `Pairs` exists only where AVX-512 and its bfloat16 were detected.
        unsafe { to_bf16_rows_avx512(x, inputs) }
    }

    #[target_feature(enable = "avx512f,avx512bf16")]
    fn to_bf16_rows_avx512(x: &[f32], inputs: usize) -> Vec<u16> {
        let width = inputs.div_ceil(2) * 2;
        let mut out = vec![0u16; x.len() / inputs * width];
        for (o, row) in out.chunks_exact_mut(width).zip(x.chunks_exact(inputs)) {
            let o = &mut o[..inputs];
            let whole = inputs / 16 * 16;
            for (o, c) in o[..whole].chunks_exact_mut(16).zip(row.chunks_exact(16)) {
                // SAFETY: `c` is sixteen floats to read, `o` sixteen bfloat16 to write.
                unsafe {
                    let h = _mm512_cvtneps_pbh(_mm512_loadu_ps(c.as_ptr()));
                    let h = std::mem::transmute::<__m256bh, __m256i>(h);
                    _mm256_storeu_si256(o.as_mut_ptr().cast::<__m256i>(), h);
                }
            }
            for (o, v) in o[whole..].iter_mut().zip(&row[whole..]) {
                *o = bf16(*v);
            }
        }
        out
    }

    /// Strip `s` of the product, from bfloat16 pairs of weights and the rows of
    /// [`to_bf16_rows`].
    pub(super) fn strip_bf16(
        d: &Dense,
        x: &[u16],
        s: usize,
        strip: &[u32],
        out: &mut [f32],
        _: Pairs,
    ) {
        // SAFETY: a `Pairs` exists only where AVX-512 and its bfloat16 were detected.
        unsafe { strip_avx512(d, x, s, strip, out) }
    }

    #[target_feature(enable = "avx512f,avx512bf16")]
    fn strip_avx512(d: &Dense, x: &[u16], s: usize, strip: &[u32], out: &mut [f32]) {
        let rows = x.len() / (d.inputs.div_ceil(2) * 2);
        let mut r = 0;
        while r + BF16_ROWS <= rows {
            block_bf16::<BF16_ROWS>(d, x, r, s, strip, out);
            r += BF16_ROWS;
        }
        // The rows left, in one block too: a row alone waits on its one accumulator at
        // every step, where rows together keep as many additions under way (a prompt of
        // fifteen tokens is a block of eight and one of seven, not eight, four and three
        // alone). Each row's sums are made in the same order either way.
        match rows - r {
            0 => {}
            1 => block_bf16::<1>(d, x, r, s, strip, out),
            2 => block_bf16::<2>(d, x, r, s, strip, out),
            3 => block_bf16::<3>(d, x, r, s, strip, out),
            4 => block_bf16::<4>(d, x, r, s, strip, out),
            5 => block_bf16::<5>(d, x, r, s, strip, out),
            6 => block_bf16::<6>(d, x, r, s, strip, out),
            _ => block_bf16::<7>(d, x, r, s, strip, out),
        }
    }

    /// Rows `r..r + R` of the output's strip `s`, one register of sixteen per row: each
    /// step adds a pair of inputs times the pair of weights of every output of the strip.
    #[target_feature(enable = "avx512f,avx512bf16")]
    fn block_bf16<const R: usize>(
        d: &Dense,
        x: &[u16],
        r: usize,
        s: usize,
        strip: &[u32],
        out: &mut [f32],
    ) {
        let pairs = d.inputs.div_ceil(2);
        assert!(x.len() >= (r + R) * pairs * 2 && strip.len() == pairs * STRIP);
        // Raw pointers to each row's pairs: a slice per row would hold twice the registers.
        let inputs: [*const u32; R] =
            std::array::from_fn(|i| x[(r + i) * pairs * 2..].as_ptr().cast::<u32>());
        let mut acc: [__m512; R] = [_mm512_setzero_ps(); R];
        for (p, w) in strip.chunks_exact(STRIP).enumerate() {
            // SAFETY: `w` is STRIP = 16 pairs, one load; a vector of sixteen pairs of
            // bfloat16 has the bits of sixteen 32-bit integers.
            let w: __m512bh = unsafe {
                std::mem::transmute::<__m512i, __m512bh>(_mm512_loadu_si512(
                    w.as_ptr().cast::<__m512i>(),
                ))
            };
            for (a, input) in acc.iter_mut().zip(&inputs) {
                // SAFETY: `p < pairs` (the strip holds `pairs` steps of STRIP) and each row
                // is `pairs` pairs of the `x` asserted above; read unaligned, as two u16.
                let b = unsafe {
                    let pair = input.add(p).read_unaligned();
                    std::mem::transmute::<__m512i, __m512bh>(_mm512_set1_epi32(pair as i32))
                };
                *a = _mm512_dpbf16_ps(*a, b, w);
            }
        }
        for (i, a) in acc.iter().enumerate() {
            let mut sums = [0f32; STRIP];
            // SAFETY: `sums` is STRIP = 16 floats: one store.
            unsafe { _mm512_storeu_ps(sums.as_mut_ptr(), *a) };
            d.store(r + i, s, &sums, out);
        }
    }
}

/// Without x86-64 there is no [`Fast`] nor [`Pairs`], so no function here is ever called.
#[cfg(not(target_arch = "x86_64"))]
mod simd {
    use super::{Dense, Fast, Pairs};

    pub(super) fn to_bf16_rows(_: &[f32], _: usize, _: Pairs) -> Vec<u16> {
        unreachable!("no Pairs without x86-64")
    }

    pub(super) fn strip_bf16(_: &Dense, _: &[u16], _: usize, _: &[u32], _: &mut [f32], _: Pairs) {
        unreachable!("no Pairs without x86-64")
    }

    pub(super) fn to_half(_: &[f32], _: Fast) -> Vec<u16> {
        unreachable!("no Fast without x86-64")
    }

    pub(super) fn strip(_: &Dense, _: &[f32], _: usize, _: &[u16], _: &mut [f32], _: Fast) {
        unreachable!("no Fast without x86-64")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The plain product, in f64.
    fn reference(x: &[f32], w: &[f32], b: &[f32], inputs: usize) -> Vec<f32> {
        let mut out = Vec::new();
        for input in x.chunks_exact(inputs) {
            for (row, bias) in w.chunks_exact(inputs).zip(b) {
                let sum: f64 = input
                    .iter()
                    .zip(row)
                    .map(|(a, w)| *a as f64 * *w as f64)
                    .sum();
                out.push((sum + *bias as f64) as f32);
            }
        }
        out
    }

    fn numbers(seed: &mut u64, n: usize) -> Vec<f32> {
        (0..n)
            .map(|_| {
                *seed = seed
                    .wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1_442_695_040_888_963_407);
                (*seed >> 40) as f32 / (1u64 << 24) as f32 - 0.5
            })
            .collect()
    }

    #[test]
    fn the_product_is_the_plain_one_for_any_shape() {
        let mut seed = 7;
        // Rows below, at and past a block of four, and enough for threads of their own;
        // outputs below, at and past a strip.
        for (rows, inputs, outputs) in [
            (1, 3, 1),
            (3, 8, 16),
            (4, 5, 17),
            (9, 33, 40),
            (15, 64, 48),
            (4 * ROWS_PER_THREAD + 3, 20, 33),
        ] {
            let w = numbers(&mut seed, inputs * outputs);
            let b = numbers(&mut seed, outputs);
            let x = numbers(&mut seed, rows * inputs);
            let want = reference(&x, &w, &b, inputs);
            let n = inputs as f32;
            // Every arithmetic this processor has, with how far from the plain product its
            // rounding may take a result (inputs and weights below 0.5).
            let mut ariths = vec![(Arith::Single, 1e-5)];
            if let Some(fast) = Fast::detect() {
                // Half-precision weights: each within 2⁻¹¹ of itself.
                ariths.push((Arith::Half(fast), n * 0.5 * 0.5 / 2048.0 + 1e-5));
            }
            if let Some(pairs) = Pairs::detect() {
                // Weights and inputs in bfloat16: each within 2⁻⁸ of itself.
                ariths.push((Arith::Bf16(pairs), n * 0.5 * 0.5 * 2.0 / 256.0 + 1e-5));
            }
            for (arith, bound) in ariths {
                let got = Dense::packed(&w, &b, inputs, outputs, arith).product(&x);
                assert_eq!(got.len(), rows * outputs);
                for (g, w) in got.iter().zip(&want) {
                    assert!(
                        (g - w).abs() < bound,
                        "{arith:?} {rows}×{inputs}→{outputs}: {g} against {w}"
                    );
                }
            }
        }
    }

    #[test]
    fn a_rows_result_does_not_depend_on_the_rows_beside_it() {
        // However the rows are blocked together, each row's sums are made in the same
        // order: a row's product alone and among any number of others are the same bits.
        let mut seed = 11;
        let (inputs, outputs) = (37, 40);
        let w = numbers(&mut seed, inputs * outputs);
        let b = numbers(&mut seed, outputs);
        let x = numbers(&mut seed, 20 * inputs);
        let mut ariths = vec![Arith::Single];
        ariths.extend(Fast::detect().map(Arith::Half));
        ariths.extend(Pairs::detect().map(Arith::Bf16));
        for arith in ariths {
            let d = Dense::packed(&w, &b, inputs, outputs, arith);
            let alone: Vec<Vec<f32>> = x.chunks(inputs).map(|row| d.product(row)).collect();
            for rows in 1..=20 {
                let together = d.product(&x[..rows * inputs]);
                for (r, got) in together.chunks(outputs).enumerate() {
                    assert_eq!(got, alone[r], "{arith:?}: row {r} of {rows}");
                }
            }
        }
    }

    #[test]
    #[should_panic(expected = "rows of 5 inputs")]
    fn a_partial_row_is_refused() {
        Dense::new(&[0.0; 10], &[0.0; 2], 5, 2).product(&[0.0; 7]);
    }
}

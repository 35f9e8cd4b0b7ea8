//! Token sampling: one function that the host (`etch generate`) and on-device sampling
//! kernels both follow, so a program that samples inside (`prefill`/`decode` returning a
//! token id) and a host that samples from returned logits pick the same token from the
//! same logits and the same uniform draw; and the host's random number generator.

use std::cmp::Ordering;

/// Picks a token id from one row of logits.
///
/// The rule, step by step (the on-device kernels implement the same):
///
/// 1. If `temperature <= 0` (or is NaN) or `top_k == 1`: the argmax, the first maximal
///    index; NaN never wins (a row of NaN gives 0). This is greedy decoding.
/// 2. Otherwise `p_i = softmax(logits_i / temperature)`, in `f32`: `s_i = logits_i /
///    temperature` (a NaN `s_i` counts as `-inf`), `m = max s_i`, `e_i = exp(s_i - m)`
///    (when `m` is `+inf`, `e_i` is 1 where `s_i` is `+inf` and 0 elsewhere; when every
///    `s_i` is `-inf`, step 1's argmax is returned), `p_i = e_i / Σ e` with the sum taken
///    in index order.
/// 3. If `top_k > 0`, keep the `top_k` largest `p` (ties: the lower index first).
/// 4. Sort the kept ids by `p` descending, ties by the lower index first.
/// 5. If `top_p < 1`, keep the shortest prefix of that order whose running sum of `p`
///    (the step-2 probabilities, not renormalised after step 3) is `>= top_p`; at least
///    one id; all of them when the sum never reaches `top_p`.
/// 6. `total` = the sum of the kept `p` in that order. Return the first kept id (in that
///    order) whose running sum of `p` is `> u * total`, or the last kept id if none is.
///
/// `u` is a uniform number in `[0, 1)` (see [`SplitMix64::next_f32`]); `u = 0` picks the
/// most probable kept id. An empty row gives 0. All sums are sequential `f32` additions
/// in the order stated.
pub fn sample_row(logits: &[f32], temperature: f32, top_k: usize, top_p: f32, u: f32) -> usize {
    let (mut p, mut order) = (Vec::new(), Vec::new());
    sample_row_in(logits, temperature, top_k, top_p, u, &mut p, &mut order)
}

/// [`sample_row`] with its work buffers passed in (probabilities and the kept ids), so
/// that a kernel sampling every step reuses them instead of allocating.
pub fn sample_row_in(
    logits: &[f32],
    temperature: f32,
    top_k: usize,
    top_p: f32,
    u: f32,
    p: &mut Vec<f32>,
    order: &mut Vec<usize>,
) -> usize {
    // A NaN temperature is greedy too.
    if logits.is_empty() || temperature.is_nan() || temperature <= 0.0 || top_k == 1 {
        return argmax(logits);
    }
    if !softmax_scaled(logits, temperature, p) {
        return argmax(logits);
    }
    let p = &p[..];
    // Descending probability, then ascending index: a total order (no NaN in `p`).
    let by_p = |a: &usize, b: &usize| -> Ordering { p[*b].total_cmp(&p[*a]).then(a.cmp(b)) };
    order.clear();
    order.extend(0..p.len());
    if top_k > 0 && top_k < order.len() {
        order.select_nth_unstable_by(top_k - 1, by_p);
        order.truncate(top_k);
    }
    order.sort_unstable_by(by_p);
    if top_p < 1.0 {
        let mut sum = 0.0f32;
        if let Some(i) = order.iter().position(|&j| {
            sum += p[j];
            sum >= top_p
        }) {
            order.truncate(i + 1);
        }
    }
    let total: f32 = order.iter().map(|&j| p[j]).sum();
    let threshold = u * total;
    let mut sum = 0.0f32;
    for &j in order.iter() {
        sum += p[j];
        if sum > threshold {
            return j;
        }
    }
    order.last().copied().unwrap_or(0)
}

/// The first maximal index; NaN never wins; 0 for an empty or all-NaN row.
pub fn argmax(row: &[f32]) -> usize {
    let mut best: Option<usize> = None;
    for (i, &x) in row.iter().enumerate() {
        if x.is_nan() {
            continue;
        }
        match best {
            Some(b) if x <= row[b] => {}
            _ => best = Some(i),
        }
    }
    best.unwrap_or(0)
}

/// `softmax(logits / temperature)` as [`sample_row`] step 2 defines it, into `e`; false
/// when every scaled logit is `-inf` or NaN.
fn softmax_scaled(logits: &[f32], temperature: f32, e: &mut Vec<f32>) -> bool {
    e.clear();
    e.extend(logits.iter().map(|&x| {
        let v = x / temperature;
        if v.is_nan() { f32::NEG_INFINITY } else { v }
    }));
    let m = e.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    if m == f32::NEG_INFINITY {
        return false;
    }
    for v in e.iter_mut() {
        *v = if m == f32::INFINITY {
            (*v == f32::INFINITY) as u8 as f32
        } else {
            (*v - m).exp()
        };
    }
    let sum: f32 = e.iter().sum();
    for x in e.iter_mut() {
        *x /= sum;
    }
    true
}

/// The host's random number generator for sampling: splitmix64 (Steele, Lea and Flood,
/// 2014), a 64-bit state advanced by the golden-ratio increment `0x9E37_79B9_7F4A_7C15`
/// and mixed. `etch generate --seed S` starts it at `S` (default 0) and draws one
/// [`SplitMix64::next_f32`] per generated token, greedy or not, so a seed names one
/// stream whatever the other options are.
#[derive(Debug, Clone)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    /// A generator whose state starts at `seed`.
    pub fn new(seed: u64) -> SplitMix64 {
        SplitMix64(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A uniform number in `[0, 1)`: the top 24 bits of [`SplitMix64::next_u64`] divided
    /// by 2^24 (every value exact in `f32`).
    pub fn next_f32(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u32 << 24) as f32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn greedy_is_the_first_maximum_and_nan_never_wins() {
        assert_eq!(sample_row(&[1.0, 3.0, 3.0, 2.0], 0.0, 0, 1.0, 0.9), 1);
        assert_eq!(
            sample_row(&[f32::NAN, 1.0, 5.0, f32::NAN], 0.0, 0, 1.0, 0.0),
            2
        );
        assert_eq!(sample_row(&[f32::NAN, f32::NAN], 0.0, 0, 1.0, 0.0), 0);
        assert_eq!(sample_row(&[], 1.0, 0, 1.0, 0.5), 0);
        // top_k = 1 and a negative or NaN temperature are greedy too.
        assert_eq!(sample_row(&[0.0, 9.0, 1.0], 1.0, 1, 1.0, 0.99), 1);
        assert_eq!(sample_row(&[0.0, 9.0, 1.0], -1.0, 0, 1.0, 0.99), 1);
        assert_eq!(sample_row(&[0.0, 9.0, 1.0], f32::NAN, 0, 1.0, 0.99), 1);
    }

    #[test]
    fn u_walks_the_sorted_cumulative_distribution() {
        // p = softmax(ln [1, 2, 3, 4]) = [0.1, 0.2, 0.3, 0.4]; sorted: 3, 2, 1, 0.
        let logits: Vec<f32> = [1.0f32, 2.0, 3.0, 4.0].iter().map(|x| x.ln()).collect();
        let pick = |u| sample_row(&logits, 1.0, 0, 1.0, u);
        assert_eq!(pick(0.0), 3);
        assert_eq!(pick(0.39), 3);
        assert_eq!(pick(0.41), 2);
        assert_eq!(pick(0.69), 2);
        assert_eq!(pick(0.71), 1);
        assert_eq!(pick(0.91), 0);
        assert_eq!(pick(0.999_999), 0);
        // Past the end (u >= 1): the last kept id.
        assert_eq!(pick(1.5), 0);
    }

    #[test]
    fn top_k_keeps_the_largest_with_lower_index_first_on_ties() {
        // Ties at 2.0 (ids 1, 2, 4): top_k = 2 keeps ids 1 and 2; with u near 1 the
        // second of the two wins, never id 4.
        let logits = [0.0, 2.0, 2.0, 1.0, 2.0];
        assert_eq!(sample_row(&logits, 1.0, 2, 1.0, 0.0), 1);
        assert_eq!(sample_row(&logits, 1.0, 2, 1.0, 0.99), 2);
        assert_eq!(sample_row(&logits, 1.0, 3, 1.0, 0.99), 4);
        // top_k larger than the row keeps everything.
        assert_eq!(sample_row(&logits, 1.0, 100, 1.0, 0.999_999), 0);
    }

    #[test]
    fn top_p_keeps_the_shortest_prefix_reaching_p() {
        let logits: Vec<f32> = [1.0f32, 2.0, 3.0, 4.0].iter().map(|x| x.ln()).collect();
        // 0.4 + 0.3 >= 0.65: ids 3 and 2 kept, renormalised by total 0.7.
        assert_eq!(sample_row(&logits, 1.0, 0, 0.65, 0.99), 2);
        assert_eq!(sample_row(&logits, 1.0, 0, 0.65, 0.5), 3);
        assert_eq!(sample_row(&logits, 1.0, 0, 0.65, 0.6), 2);
        // A tiny top_p keeps one id.
        assert_eq!(sample_row(&logits, 1.0, 0, 1e-6, 0.99), 3);
        // top_k first, then top_p over the unrenormalised p: 0.4 + 0.3 < 0.95 keeps both.
        assert_eq!(sample_row(&logits, 1.0, 2, 0.95, 0.99), 2);
    }

    #[test]
    fn temperature_sharpens_and_flattens() {
        let logits = [0.0f32, 1.0];
        // p(1) = 1/(1+e^-1) = 0.731 at T = 1; 0.9999 at T = 0.1; 0.525 at T = 10.
        assert_eq!(sample_row(&logits, 1.0, 0, 1.0, 0.7), 1);
        assert_eq!(sample_row(&logits, 1.0, 0, 1.0, 0.75), 0);
        assert_eq!(sample_row(&logits, 0.1, 0, 1.0, 0.99), 1);
        assert_eq!(sample_row(&logits, 10.0, 0, 1.0, 0.5), 1);
        assert_eq!(sample_row(&logits, 10.0, 0, 1.0, 0.55), 0);
    }

    #[test]
    fn non_finite_logits() {
        // +inf ids share the mass; NaN and -inf ids get none.
        let logits = [
            f32::NAN,
            f32::INFINITY,
            0.0,
            f32::INFINITY,
            f32::NEG_INFINITY,
        ];
        assert_eq!(sample_row(&logits, 1.0, 0, 1.0, 0.2), 1);
        assert_eq!(sample_row(&logits, 1.0, 0, 1.0, 0.7), 3);
        let none = [f32::NAN, f32::NEG_INFINITY];
        assert_eq!(sample_row(&none, 1.0, 0, 1.0, 0.5), 1);
    }

    #[test]
    fn frequencies_follow_the_probabilities() {
        let logits: Vec<f32> = [1.0f32, 2.0, 3.0, 4.0].iter().map(|x| x.ln()).collect();
        let mut rng = SplitMix64::new(7);
        let mut counts = [0usize; 4];
        let n = 20_000;
        for _ in 0..n {
            counts[sample_row(&logits, 1.0, 0, 1.0, rng.next_f32())] += 1;
        }
        for (i, &c) in counts.iter().enumerate() {
            let want = (i + 1) as f64 / 10.0;
            let got = c as f64 / n as f64;
            assert!((got - want).abs() < 0.015, "id {i}: {got} vs {want}");
        }
    }

    #[test]
    fn splitmix64_is_deterministic_and_in_range() {
        // The reference sequence for seed 0 (Vigna's splitmix64.c).
        let mut r = SplitMix64::new(0);
        assert_eq!(r.next_u64(), 0xE220_A839_7B1D_CDAF);
        assert_eq!(r.next_u64(), 0x6E78_9E6A_A1B9_65F4);
        let mut a = SplitMix64::new(42);
        let mut b = SplitMix64::new(42);
        for _ in 0..1000 {
            let x = a.next_f32();
            assert_eq!(x, b.next_f32());
            assert!((0.0..1.0).contains(&x));
        }
        assert_ne!(SplitMix64::new(1).next_f32(), SplitMix64::new(2).next_f32());
    }
}

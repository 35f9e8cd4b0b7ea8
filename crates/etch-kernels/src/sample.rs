//! Next-token sampling, shared by `etch::sample` (on the device) and `etch generate` (on
//! the host, for programs that return logits).

/// The index sampled from one row of logits:
/// - `temperature <= 0` (or NaN) or `top_k == 1`: the argmax (the first maximal index; NaN
///   never wins);
/// - otherwise `p = softmax(logits / temperature)` (in f32, max subtracted); keep the
///   `top_k` largest (`0`: all), in descending order with ties to the lower index; with
///   `top_p < 1` keep the shortest prefix whose sum reaches `top_p` (at least one); then
///   return the first kept index whose running sum exceeds `u * sum(kept)` (the last kept
///   if rounding leaves none). `u` is uniform in `[0, 1)`.
///
/// Allocates a sort buffer when sampling (not for greedy).
pub fn sample_row(logits: &[f32], temperature: f32, top_k: usize, top_p: f32, u: f32) -> usize {
    let greedy = temperature.is_nan() || temperature <= 0.0 || top_k == 1;
    if greedy || logits.len() <= 1 {
        return argmax(logits);
    }
    let mx = logits
        .iter()
        .copied()
        .filter(|v| !v.is_nan())
        .fold(f32::NEG_INFINITY, f32::max);
    let mut idx: Vec<(f32, usize)> = logits
        .iter()
        .enumerate()
        .map(|(i, &l)| {
            let p = ((l - mx) / temperature).exp();
            (if p.is_nan() { 0.0 } else { p }, i)
        })
        .collect();
    let sum: f32 = idx.iter().map(|x| x.0).sum();
    if sum <= 0.0 || !sum.is_finite() {
        return argmax(logits);
    }
    idx.iter_mut().for_each(|x| x.0 /= sum);
    idx.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
    let mut n = if top_k == 0 {
        idx.len()
    } else {
        top_k.min(idx.len())
    };
    if top_p < 1.0 {
        let mut acc = 0f32;
        for (j, x) in idx[..n].iter().enumerate() {
            acc += x.0;
            if acc >= top_p {
                n = j + 1;
                break;
            }
        }
    }
    let kept = &idx[..n.max(1)];
    let total: f32 = kept.iter().map(|x| x.0).sum();
    let target = u * total;
    let mut acc = 0f32;
    for x in kept {
        acc += x.0;
        if acc > target {
            return x.1;
        }
    }
    kept[kept.len() - 1].1
}

/// The first index of the largest value (NaN never wins; 0 for an empty or all-NaN row).
pub fn argmax(v: &[f32]) -> usize {
    let mut best = 0usize;
    let mut bv = f32::NEG_INFINITY;
    let mut found = false;
    for (i, &x) in v.iter().enumerate() {
        if !x.is_nan() && (!found || x > bv) {
            best = i;
            bv = x;
            found = true;
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn greedy_is_the_first_argmax() {
        assert_eq!(sample_row(&[1.0, 3.0, 3.0, f32::NAN], 0.0, 0, 1.0, 0.5), 1);
        assert_eq!(sample_row(&[1.0, 3.0, 2.0], 0.7, 1, 1.0, 0.9), 1);
    }

    #[test]
    fn u_walks_the_sorted_distribution() {
        // p ∝ e^[0, ln 2, ln 3] = [1, 2, 3] / 6, sorted: 2 (0.5), 1 (0.333), 0 (0.167).
        let l = [0.0, 2f32.ln(), 3f32.ln()];
        assert_eq!(sample_row(&l, 1.0, 0, 1.0, 0.0), 2);
        assert_eq!(sample_row(&l, 1.0, 0, 1.0, 0.49), 2);
        assert_eq!(sample_row(&l, 1.0, 0, 1.0, 0.51), 1);
        assert_eq!(sample_row(&l, 1.0, 0, 1.0, 0.99), 0);
        // top_k 2 renormalises over {2, 1}: 2 below u = 0.6, 1 above.
        assert_eq!(sample_row(&l, 1.0, 2, 1.0, 0.59), 2);
        assert_eq!(sample_row(&l, 1.0, 2, 1.0, 0.61), 1);
        assert_eq!(sample_row(&l, 1.0, 2, 1.0, 0.99), 1);
        // top_p 0.5 keeps only 2.
        assert_eq!(sample_row(&l, 1.0, 0, 0.5, 0.99), 2);
    }
}

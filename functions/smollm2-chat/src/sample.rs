//! Choosing the next token from a row of logits on the guest: greedy (temperature 0,
//! the device's argmax does it without reading the logits back), or sampling with
//! temperature and top-p from a seeded PRNG, so a seed gives the same text every time.
//!
//! Sampling: probabilities `softmax(logits / temperature)` in f64; tokens sorted by
//! probability (descending, ties by lower id); the nucleus is the shortest prefix whose
//! probabilities sum to at least `top_p` (at least one token); a uniform `u` in
//! `[0, nucleus mass)` from SplitMix64 picks the first token whose running sum exceeds
//! it.

/// SplitMix64: a small, well-mixed 64-bit generator.
pub struct SplitMix64(u64);

impl SplitMix64 {
    pub fn new(seed: u64) -> Self {
        SplitMix64(seed)
    }

    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)` with 53 random bits.
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// A token drawn from `logits` with `temperature > 0` and `top_p` in `(0, 1]`.
pub fn sample(logits: &[f32], temperature: f32, top_p: f32, rng: &mut SplitMix64) -> u32 {
    let t = f64::from(temperature);
    let max = logits.iter().copied().filter(|x| !x.is_nan()).fold(f32::NEG_INFINITY, f32::max);
    let mut probs: Vec<(u32, f64)> = logits
        .iter()
        .enumerate()
        .map(|(i, &x)| (i as u32, if x.is_nan() { 0.0 } else { ((f64::from(x) - f64::from(max)) / t).exp() }))
        .collect();
    let total: f64 = probs.iter().map(|(_, p)| p).sum();
    probs.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    let mut kept = 0;
    let mut mass = 0.0;
    for &(_, p) in &probs {
        kept += 1;
        mass += p / total;
        if mass >= f64::from(top_p) {
            break;
        }
    }
    let u = rng.next_f64() * mass;
    let mut run = 0.0;
    for &(id, p) in &probs[..kept] {
        run += p / total;
        if u < run {
            return id;
        }
    }
    probs[kept - 1].0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tiny_top_p_keeps_only_the_most_likely_token() {
        let logits = [0.1, 3.0, 2.9, -1.0];
        let mut rng = SplitMix64::new(7);
        assert!((0..100).all(|_| sample(&logits, 1.0, 1e-6, &mut rng) == 1));
    }

    #[test]
    fn draws_follow_the_distribution_and_repeat_with_the_seed() {
        let logits = [0.0f32, 2f32.ln(), f32::NEG_INFINITY];
        let draw = |seed| {
            let mut rng = SplitMix64::new(seed);
            (0..3000).map(|_| sample(&logits, 1.0, 1.0, &mut rng)).collect::<Vec<_>>()
        };
        let a = draw(3);
        assert_eq!(a, draw(3));
        let ones = a.iter().filter(|&&t| t == 1).count();
        assert!((1800..2200).contains(&ones), "{ones} of 3000 draws of p = 2/3");
        assert!(a.iter().all(|&t| t < 2), "a token of probability 0 is never drawn");
    }
}

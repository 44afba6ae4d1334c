//! The retry schedule of failed jobs: exponential from a base delay, capped, with ±20 % jitter
//! so that jobs failing together do not retry together.

use rand::Rng;

#[derive(Debug, Clone, Copy)]
pub struct Backoff {
    pub base_ms: i64,
    pub cap_ms: i64,
}

impl Backoff {
    /// Delay before the next attempt after `attempts` failed ones (1 = the first failed).
    pub fn delay_ms(&self, attempts: u32, rng: &mut impl Rng) -> i64 {
        let nominal = self.nominal_ms(attempts);
        let jitter = rng.gen_range(-0.2..=0.2);
        // Jitter applies to an integer millisecond count; the float never touches money.
        (nominal as f64 * (1.0 + jitter)).round() as i64
    }

    pub fn nominal_ms(&self, attempts: u32) -> i64 {
        let exponent = attempts.saturating_sub(1).min(40);
        self.base_ms.saturating_mul(1_i64 << exponent).min(self.cap_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_to_the_cap() {
        let b = Backoff { base_ms: 1_000, cap_ms: 60_000 };
        assert_eq!(b.nominal_ms(1), 1_000);
        assert_eq!(b.nominal_ms(2), 2_000);
        assert_eq!(b.nominal_ms(6), 32_000);
        assert_eq!(b.nominal_ms(7), 60_000);
        assert_eq!(b.nominal_ms(200), 60_000);
    }

    #[test]
    fn jitter_stays_within_twenty_percent() {
        let b = Backoff { base_ms: 10_000, cap_ms: 60_000 };
        let mut rng = rand::thread_rng();
        for _ in 0..1_000 {
            let d = b.delay_ms(1, &mut rng);
            assert!((8_000..=12_000).contains(&d), "{d}");
        }
    }
}

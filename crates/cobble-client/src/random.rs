//! Random numbers for what needs to be unpredictable enough not to collide, not secret:
//! multipart boundaries, websocket masking keys (RFC 6455, section 10.3), temporary file
//! names, the seed of backoff jitter.

use std::hash::{BuildHasher, Hasher};

/// A random 64-bit number, from the standard library's per-instance random hash keys and
/// the clock.
pub fn random_u64() -> u64 {
    let mut hasher = std::hash::RandomState::new().build_hasher();
    hasher.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    hasher.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_numbers_differ() {
        assert_ne!(random_u64(), random_u64());
    }
}

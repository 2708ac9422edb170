//! Ratio routing: which broker a user's events try first.
//!
//! The user's bucket is `uid % 100` when the user id is a number, else a CRC-32 of it
//! modulo 100: stable, so a user always starts on the same broker for a given ratio.

/// The bucket (0..100) a user id falls in for ratio routing.
pub fn bucket(user_id: &str) -> u8 {
    let n = match user_id.parse::<u64>() {
        Ok(n) => n,
        Err(_) => u64::from(crc32fast::hash(user_id.as_bytes())),
    };
    u8::try_from(n % 100).unwrap_or(0)
}

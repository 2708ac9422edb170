//! Byte edits for the arbitrary-input runs of every decoder of outside input (the
//! event, dead-letter and token decoders, the token opener, the spool reader, the
//! wallet's JSON bodies): starting from a valid encoding and editing it reaches the
//! decoders' deeper paths, where purely random bytes stop at the first length check.
//!
//! ```
//! let mut b = b"abc".to_vec();
//! proto::edits::apply(&mut b, &[(1, b'X', 0), (0, b'>', 1), (99, 0, 2)]);
//! assert_eq!(b, b">aX".to_vec());
//! ```

/// Applies `edits` in order: `(position seed, byte, op)`. The position is the seed
/// modulo `len + 1`; op 0 overwrites the byte there (or appends at the end), 1 inserts,
/// 2 and above removes it (or, at the end, removes the last byte).
pub fn apply(bytes: &mut Vec<u8>, edits: &[(usize, u8, u8)]) {
    for &(seed, b, op) in edits {
        let i = seed % (bytes.len() + 1);
        match op {
            0 if i < bytes.len() => bytes[i] = b,
            0 | 1 => bytes.insert(i, b),
            _ if i < bytes.len() => {
                bytes.remove(i);
            }
            _ => {
                bytes.pop();
            }
        }
    }
}

/// Cases of an arbitrary-input run: `FUZZ_CASES` when set (10 000 000 for the long
/// runs in BENCHMARKS.md, release build), else 20 000 (the test suite's short run).
pub fn cases() -> u32 {
    std::env::var("FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000)
}

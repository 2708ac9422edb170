//! Edited copies of what the service hands out.

/// Flips one base64 character in the middle of a token or session: an edited copy.
pub fn tampered(text: &str) -> String {
    let mut b = text.as_bytes().to_vec();
    let i = b.len() / 2;
    b[i] = if b[i] == b'A' { b'B' } else { b'A' };
    String::from_utf8(b).unwrap()
}

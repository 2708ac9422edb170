//! Unit tests of the queue: ratio bucketing of user ids.

use super::*;

#[test]
fn numeric_ids_bucket_by_modulo_others_stably() {
    assert_eq!(bucket("1234"), 34);
    assert_eq!(bucket("99"), 99);
    assert_eq!(bucket("u42"), bucket("u42"));
    assert!(bucket("u42") < 100);
}

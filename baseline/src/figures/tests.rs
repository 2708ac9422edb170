//! Tests of the latency percentiles (nearest rank).

use super::Percentiles;

#[test]
fn nearest_rank_percentiles() {
    let mut v: Vec<u64> = (1..=1000).rev().collect();
    let p = Percentiles::of(&mut v);
    assert_eq!(
        p,
        Percentiles {
            count: 1000,
            p50: 500,
            p99: 990,
            p999: 999,
            max: 1000
        }
    );
    assert_eq!(Percentiles::of(&mut []), Percentiles::default());
    assert_eq!(Percentiles::of(&mut [7]).p99, 7);
}

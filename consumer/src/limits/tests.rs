//! Unit tests of the limits: settings checks, the empty swap, fuses, the rate over time.
use std::time::Duration;

use super::*;

fn doc(text: &str) -> toml::Table {
    text.parse().unwrap()
}

#[test]
fn reads_checks_and_sums() {
    let d = doc(
        "[limits.types.cash]\nrate = 300\npriority = 9\n[limits.types.coupon]\nrate = 20\n[limits.types.gem]\nrate = 5\nfused = true\n",
    );
    let c = LimitsConfig::from_document(&d).unwrap();
    assert_eq!(c.effective_global(), 320.0, "fused types do not count");
    assert_eq!(
        LimitsConfig::from_document(&doc("[limits]\nglobal = 50\n"))
            .unwrap()
            .effective_global(),
        50.0
    );
    for bad in [
        "[limits.types.cash]\nrate = 0\n",
        "[limits.types.cash]\nrate = -1\n",
        "[limits.types.cash]\nrate = 1\nburst = 0\n",
        "[limits]\nglobal = -5\n",
        "[limits]\nspeed = 5\n",
        "[limits.types.cash]\nrate = \"fast\"\n",
    ] {
        assert!(LimitsConfig::from_document(&doc(bad)).is_err(), "{bad}");
    }
}

#[test]
fn a_new_limiter_starts_empty_and_a_swap_adds_no_burst() {
    let l = Limits::new(
        LimitsConfig::from_document(&doc("[limits.types.coupon]\nrate = 1\nburst = 100\n"))
            .unwrap(),
    );
    assert_eq!(l.check("coupon"), Verdict::Limited, "starts empty");
    // Ten changes in a row never hand out a burst.
    for r in 2..12 {
        l.apply(&doc(&format!(
            "[limits.types.coupon]\nrate = {r}\nburst = 100\n"
        )))
        .unwrap();
        assert_eq!(l.check("coupon"), Verdict::Limited);
    }
}

#[test]
fn fuse_and_unknown_types_and_refusal() {
    let l = Limits::new(LimitsConfig::default());
    assert_eq!(l.limit_of("stamp").rate, 1000.0);
    l.apply(&doc("[limits.types.coupon]\nrate = 5\nfused = true\n"))
        .unwrap();
    assert_eq!(l.check("coupon"), Verdict::Fused);
    assert!(l.is_fused("coupon"));
    assert!(l.apply(&doc("[limits.types.coupon]\nrate = -5\n")).is_err());
    assert!(
        l.is_fused("coupon"),
        "a refused change keeps the old settings"
    );
    l.apply(&doc("[limits.types.coupon]\nrate = 5\n")).unwrap();
    assert!(!l.is_fused("coupon"));
}

/// On tokio's paused clock (the limiters' clock), so the figure is the limiter's, not
/// the machine's: 200/s for 0.5 s passes 100, give or take the boundary credit.
#[tokio::test(start_paused = true)]
async fn rate_holds_over_time() {
    let l = Limits::new(
        LimitsConfig::from_document(&doc("[limits.types.coin]\nrate = 200\nburst = 1\n")).unwrap(),
    );
    let start = tokio::time::Instant::now();
    let mut passed = 0u32;
    while start.elapsed() < Duration::from_millis(500) {
        if l.check("coin") == Verdict::Pass {
            passed += 1;
        }
        tokio::time::sleep(Duration::from_micros(200)).await;
    }
    assert!((99..=101).contains(&passed), "{passed}");
}

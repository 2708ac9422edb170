//! Tests of replay profiles: the shipped profiles parse, scale and duration fit the
//! curve, bad profiles are refused, Zipf users are skewed, and `Curve::time_of` inverts
//! `count_at`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;
use proptest::prelude::*;

const RAIN: &str = include_str!("../../profiles/rain.toml");

#[test]
fn shipped_profiles_parse_and_check() {
    for (name, text) in [
        ("rain", RAIN),
        ("cards", include_str!("../../profiles/cards.toml")),
        ("fireworks", include_str!("../../profiles/fireworks.toml")),
        ("overlap", include_str!("../../profiles/overlap.toml")),
    ] {
        let p = Profile::parse(text, name).unwrap();
        assert_eq!(p.name, name);
        let plan = p.plan(0.001, Some(60.0)).unwrap();
        assert!(plan.expected_sends() > 0.0, "{name}");
    }
}

#[test]
fn rain_sends_most_of_its_traffic_in_the_first_three_minutes() {
    let plan = Profile::parse(RAIN, "rain")
        .unwrap()
        .plan(1.0, None)
        .unwrap();
    let c = &plan.scenes[0].curve;
    let share = c.count_at(180.0) / c.total();
    assert!(share > 0.6, "first 3 min carry {share:.2}");
    // The expected peak of docs/design.md, 1.8 M/s, at full scale.
    assert!(
        (plan.peak_rate() - 1_800_000.0).abs() < 1.0,
        "{}",
        plan.peak_rate()
    );
}

#[test]
fn scale_and_duration_fit_the_curve() {
    let p = Profile::parse(RAIN, "rain").unwrap();
    let full = p.plan(1.0, None).unwrap();
    let fit = p.plan(0.01, Some(60.0)).unwrap();
    let ratio = fit.expected_sends() / full.expected_sends();
    // 1/100 of the rate over 1/10 of the time.
    assert!((ratio - 0.001).abs() < 1e-9, "{ratio}");
    assert_eq!(fit.users, (p.users as f64 * 0.01).round() as u64);
}

#[test]
fn bad_profiles_are_refused_naming_the_problem() {
    let cases = [
        (
            RAIN.replace("duration_secs = 600", "duration_secs = 0"),
            "duration_secs",
        ),
        (
            RAIN.replace("zipf_exponent = 1.1", "zipf_exponent = -1"),
            "zipf_exponent",
        ),
        (RAIN.replace("[1.0, ", "[0.9, "), "from fraction 0 to 1"),
        (RAIN.replace("weight = 95", "weight = 0"), "weight"),
        (
            RAIN.replace("amount = [1, 2000]", "amount = [5, 1]"),
            "amount",
        ),
        (RAIN.replace("users =", "userz ="), "userz"),
    ];
    for (text, want) in cases {
        let e = Profile::parse(&text, "x").expect_err(want).to_string();
        assert!(e.contains(want), "{e} should name {want}");
    }
    let p = Profile::parse(RAIN, "rain").unwrap();
    assert!(p.plan(0.0, None).is_err());
    assert!(p.plan(1.0, Some(-1.0)).is_err());
}

#[test]
fn zipf_users_are_skewed_and_in_range() {
    let u = Users::new(1000, 1.1);
    let mut rng = rand::rng();
    let mut top = 0;
    for _ in 0..10_000 {
        let r = u.draw(&mut rng);
        assert!((1..=1000).contains(&r));
        if r <= 10 {
            top += 1;
        }
    }
    // With s = 1.1 the top 1% of users take far more than 1% of the wins.
    assert!(top > 2_000, "top 10 users won {top} of 10 000");
}

proptest! {
    #[test]
    fn time_of_inverts_count_at(
        rates in proptest::collection::vec(0.0f64..5_000.0, 2..8),
        q in 0.0f64..1.0,
    ) {
        let n = rates.len();
        let points = rates
            .iter()
            .enumerate()
            .map(|(i, &r)| (i as f64 * 10.0 / (n - 1) as f64, r))
            .collect();
        let c = Curve::new(points);
        prop_assume!(c.total() > 1.0);
        let target = q * c.total();
        let t = c.time_of(target).unwrap();
        prop_assert!((c.count_at(t) - target).abs() < 1e-6 * c.total().max(1.0));
        // Monotone: a later arrival is never due earlier.
        let t2 = c.time_of((target + 1.0).min(c.total())).unwrap();
        prop_assert!(t2 >= t - 1e-9);
    }
}

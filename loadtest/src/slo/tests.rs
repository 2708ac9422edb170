//! Tests of the SLO verdicts: targets met and missed, invalid runs, exit statuses and
//! `--slo` overrides.

use super::*;

fn measured() -> Measured {
    Measured {
        calls_accepted: 10_100,
        calls_refused: 0,
        accepted: 10_000,
        tokens_missing: 0,
        send_p99_us: 2_000,
        end_to_end_p99_ms: Some(800),
        start_lag_p99_us: 1_500,
        start_lag_p999_us: 3_000,
        shed: 0,
        aborted: false,
        per_second: vec![
            SecondFigures {
                send_p99_us: 2_000,
                e2e_p99_ms: 800,
                start_lag_p99_us: 1_500,
                tokens_missing: 0,
            };
            10
        ],
    }
}

#[test]
fn a_run_within_every_target_passes_with_exit_zero() {
    let v = Verdict::judge(true, &Targets::default(), &measured());
    assert!(v.passed(), "{v:?}");
    assert_eq!(v.exit_code(), 0);
    assert_eq!(v.headline, "money PASS, SLOs PASS, run VALID");
    assert_eq!(v.checks.len(), 4);
}

#[test]
fn money_can_pass_while_slos_fail_and_the_headline_says_both() {
    let mut m = measured();
    m.tokens_missing = 11; // 99.89 %
    m.per_second[4].tokens_missing = 11;
    m.send_p99_us = 50_001;
    m.per_second[7].send_p99_us = 60_000;
    let v = Verdict::judge(true, &Targets::default(), &m);
    assert!(v.money && !v.slo && v.valid);
    assert_eq!(v.exit_code(), EXIT_SLO_FAILED);
    assert!(
        v.headline.starts_with("money PASS, SLOs FAIL ("),
        "{}",
        v.headline
    );
    assert!(
        v.headline.contains("tokens_stored 99.89 %"),
        "{}",
        v.headline
    );
    let tokens = &v.checks[1];
    assert_eq!((tokens.pass, tokens.broken_secs.clone()), (false, vec![4]));
    let send = &v.checks[2];
    assert_eq!((send.pass, send.broken_secs.clone()), (false, vec![7]));
    // Exactly at the target passes.
    m.tokens_missing = 10;
    m.send_p99_us = 50_000;
    assert!(Verdict::judge(true, &Targets::default(), &m).slo);
}

#[test]
fn a_generator_that_fell_behind_makes_the_run_invalid_never_passed() {
    for (lag_us, lag_999_us, shed, aborted) in [
        (100_001, 0, 0, false),
        (0, 500_001, 0, false),
        (0, 0, 1, false),
        (0, 0, 0, true),
    ] {
        let mut m = measured();
        m.start_lag_p99_us = lag_us;
        m.start_lag_p999_us = lag_999_us;
        m.shed = shed;
        m.aborted = aborted;
        let v = Verdict::judge(true, &Targets::default(), &m);
        assert!(!v.valid && !v.passed(), "{v:?}");
        assert_eq!(v.exit_code(), EXIT_INVALID);
        assert_eq!(v.invalid_reasons.len(), 1, "{v:?}");
        assert!(v.headline.ends_with("run INVALID"));
    }
    // Money failing outranks everything.
    let mut m = measured();
    m.shed = 5;
    assert_eq!(
        Verdict::judge(false, &Targets::default(), &m).exit_code(),
        1
    );
}

#[test]
fn overrides_set_or_turn_off_targets_and_bad_ones_are_refused() {
    let mut t = Targets::default();
    t.set("send_p99_ms", "off").unwrap();
    t.set("end_to_end_p99_ms", "2500").unwrap();
    t.set("tokens_stored", "1").unwrap();
    assert_eq!(t.send_p99_ms, None);
    assert_eq!(t.end_to_end_p99_ms, Some(2500.0));
    let v = Verdict::judge(true, &t, &measured());
    assert_eq!(v.checks.len(), 3, "an off target is not judged");
    for (k, v) in [
        ("start_lag_p99_ms", "off"),
        ("tokens_stored", "1.5"),
        ("tokens_stored", "0"),
        ("send_p99_ms", "-1"),
        ("send_p99_ms", "NaN"),
        ("send_p99_ms", "fast"),
        ("p42", "1"),
    ] {
        assert!(Targets::default().set(k, v).is_err(), "{k}={v} accepted");
        assert!(parse_override(&format!("{k}={v}")).is_err());
    }
    assert!(parse_override("send_p99_ms").is_err());
    assert_eq!(
        parse_override("send_p99_ms=20"),
        Ok(("send_p99_ms".into(), "20".into()))
    );
}

#[test]
fn nothing_credited_fails_the_end_to_end_target() {
    let mut m = measured();
    m.end_to_end_p99_ms = None;
    let v = Verdict::judge(true, &Targets::default(), &m);
    assert!(!v.slo);
    assert_eq!(v.checks[3].actual, "nothing credited");
}

#[test]
fn refused_calls_count_against_the_accepted_share_and_none_accepted_fails() {
    let mut m = measured();
    m.calls_refused = 103; // 98.99 % accepted
    let v = Verdict::judge(true, &Targets::default(), &m);
    assert!(!v.slo && !v.checks[0].pass, "{:?}", v.checks[0]);
    m.calls_refused = 102; // 99.00 %
    assert!(Verdict::judge(true, &Targets::default(), &m).slo);
    // Everything refused: no token can be missing, and still a failure.
    m.calls_accepted = 0;
    m.accepted = 0;
    let v = Verdict::judge(true, &Targets::default(), &m);
    assert!(!v.slo && !v.checks[0].pass);
}

//! Unit tests of reward requests: validation errors, the event size bound, the
//! scene helpers' trade numbers, and the token and event built from a request.

use super::*;

fn ok_request() -> RewardRequest {
    RedEnvelopeRain::new("cny", "cash").grab(&User::new("u1"), 1, 100)
}

#[test]
fn the_largest_request_the_sdk_accepts_is_an_event_the_pipeline_takes() {
    use prost::Message as _;
    let l = Limits::default();
    let long = |n: usize| "x".repeat(n);
    let r = RewardRequest {
        trade_no: long(l.max_trade_no_len),
        user: User {
            user_id: long(l.max_id_len),
            device_id: long(l.max_id_len),
            app_id: long(l.max_id_len),
        },
        activity_id: long(l.max_id_len),
        scene_id: long(l.max_id_len),
        reward_type: long(l.max_id_len),
        amount: l.max_amount,
        extension: (0..l.max_extension_fields)
            .map(|i| {
                let k = format!("{i:0>width$}", width = l.max_extension_len);
                (k, long(l.max_extension_len))
            })
            .collect(),
        description: long(l.max_description_len),
    };
    r.validate(&l).unwrap();
    let mut ev = r.event(i64::MIN, i64::MIN);
    ev.retry_count = u32::MAX;
    ev.not_before_ms = i64::MIN;
    ev.proof = vec![0xff; proto::limits::PROOF_LEN];
    // The SDK's limits are the pipeline's (`proto::limits`): what it accepts, the
    // consumer and the service take.
    proto::limits::check_event(&ev).unwrap();
    let n = ev.encode_to_vec().len();
    assert!(n <= proto::limits::MAX_EVENT_BYTES, "{n}");
}

#[test]
fn what_the_sdk_accepts_the_service_can_key() {
    // Braces would split a Redis Cluster hash tag, '/' the budget scope: the SDK
    // refuses them, as the service does (both through `proto::ids`).
    let l = Limits::default();
    for bad in ["u{1}", "u}", "a/b"] {
        let mut r = ok_request();
        r.user.user_id = bad.into();
        assert!(
            matches!(
                r.validate(&l),
                Err(RequestError::BadId {
                    field: "user_id",
                    ..
                })
            ),
            "{bad}"
        );
        let mut r = ok_request();
        r.scene_id = bad.into();
        assert!(
            matches!(
                r.validate(&l),
                Err(RequestError::BadId {
                    field: "scene_id",
                    ..
                })
            ),
            "{bad}"
        );
    }
    let r = ok_request();
    assert!(r.validate(&l).is_ok());
    let ev = proto::v1::RewardEvent {
        trade_no: r.trade_no.clone(),
        user: Some(proto::v1::UserInfo {
            user_id: r.user.user_id.clone(),
            ..Default::default()
        }),
        activity_id: r.activity_id.clone(),
        scene_id: r.scene_id.clone(),
        reward_type: r.reward_type.clone(),
        amount: r.amount,
        ..Default::default()
    };
    assert!(proto::ids::check_event(&ev).is_ok());
}

// Long because it is one table of cases, one per validation error, checked in one loop.
#[test]
fn every_bad_field_has_its_own_error() {
    let l = Limits::default();
    type Mutate = Box<dyn Fn(&mut RewardRequest)>;
    type Expect = fn(&RequestError) -> bool;
    let cases: Vec<(Mutate, Expect)> = vec![
        (
            Box::new(|r: &mut RewardRequest| r.user.user_id.clear()),
            |e: &RequestError| matches!(e, RequestError::EmptyId { field: "user_id" }),
        ),
        (
            Box::new(|r: &mut RewardRequest| r.activity_id = "x".repeat(65)),
            |e: &RequestError| {
                matches!(
                    e,
                    RequestError::IdTooLong {
                        field: "activity_id",
                        len: 65,
                        max: 64
                    }
                )
            },
        ),
        (
            Box::new(|r: &mut RewardRequest| r.scene_id = "a b".into()),
            |e: &RequestError| {
                matches!(
                    e,
                    RequestError::BadId {
                        field: "scene_id",
                        found: ' '
                    }
                )
            },
        ),
        (
            Box::new(|r: &mut RewardRequest| r.user.device_id = "d:1".into()),
            |e: &RequestError| {
                matches!(
                    e,
                    RequestError::BadId {
                        field: "device_id",
                        found: ':'
                    }
                )
            },
        ),
        (
            Box::new(|r: &mut RewardRequest| r.trade_no.clear()),
            |e: &RequestError| matches!(e, RequestError::MalformedTradeNo { .. }),
        ),
        (
            Box::new(|r: &mut RewardRequest| r.trade_no = "a/b".into()),
            |e: &RequestError| matches!(e, RequestError::MalformedTradeNo { .. }),
        ),
        (
            Box::new(|r: &mut RewardRequest| r.trade_no = "t".repeat(201)),
            |e: &RequestError| matches!(e, RequestError::MalformedTradeNo { .. }),
        ),
        (
            Box::new(|r: &mut RewardRequest| r.amount = 0),
            |e: &RequestError| matches!(e, RequestError::NonPositiveAmount(0)),
        ),
        (
            Box::new(|r: &mut RewardRequest| r.amount = -5),
            |e: &RequestError| matches!(e, RequestError::NonPositiveAmount(-5)),
        ),
        (
            Box::new(|r: &mut RewardRequest| r.amount = i64::MAX),
            |e: &RequestError| matches!(e, RequestError::AmountTooLarge { .. }),
        ),
        (
            Box::new(|r: &mut RewardRequest| {
                for i in 0..17 {
                    r.extension.insert(format!("k{i}"), "v".into());
                }
            }),
            |e: &RequestError| {
                matches!(
                    e,
                    RequestError::TooManyExtensionFields { count: 17, max: 16 }
                )
            },
        ),
        (
            Box::new(|r: &mut RewardRequest| {
                r.extension.insert(String::new(), "v".into());
            }),
            |e: &RequestError| {
                matches!(
                    e,
                    RequestError::BadExtension {
                        reason: "empty key",
                        ..
                    }
                )
            },
        ),
        (
            Box::new(|r: &mut RewardRequest| {
                r.extension.insert("k".into(), "v".repeat(257));
            }),
            |e: &RequestError| {
                matches!(
                    e,
                    RequestError::BadExtension {
                        reason: "value too long",
                        ..
                    }
                )
            },
        ),
        (
            Box::new(|r: &mut RewardRequest| r.description = "d".repeat(257)),
            |e: &RequestError| matches!(e, RequestError::DescriptionTooLong { .. }),
        ),
    ];
    for (i, (spoil, expect)) in cases.into_iter().enumerate() {
        let mut r = ok_request();
        spoil(&mut r);
        let err = r.validate(&l).expect_err("spoiled request passed");
        assert!(expect(&err), "case {i}: unexpected error {err:?}");
    }
}

#[test]
fn scene_helpers_build_valid_distinct_trade_numbers() {
    let l = Limits::default();
    let u = User::new("u7").app("app1");
    let rain = RedEnvelopeRain::new("cny", "cash");
    let cards = CardCollection::new("cny", "card");
    let fw = Fireworks::new("cny", "coin", 1_000_000, 30_000);
    let reqs = [
        rain.grab(&u, 1, 5),
        rain.grab(&u, 2, 5),
        cards.draw(&u, 1, "fu"),
        fw.win(&u, 1_000_000, 3),
        fw.win(&u, 1_030_000, 3),
    ];
    let mut seen = std::collections::HashSet::new();
    for r in &reqs {
        r.validate(&l).expect("helper built an invalid request");
        assert!(seen.insert(r.trade_no.clone()), "duplicate {}", r.trade_no);
    }
    // Two wins in one fireworks slot are one reward.
    assert_eq!(
        fw.win(&u, 1_000_001, 3).trade_no,
        fw.win(&u, 1_029_999, 9).trade_no
    );
    assert_eq!(fw.slot_at(0), 0);
}

#[test]
fn token_and_event_carry_the_request() {
    let mut r = ok_request();
    r.extension.insert("k".into(), "v".into());
    let t = r.token(10, 20);
    assert_eq!(
        (
            t.trade_no.as_str(),
            t.amount,
            t.grant_time_ms,
            t.expires_at_ms
        ),
        ("cny:rain:1:u1", 100, 10, 20)
    );
    let e = r.event(10, 20);
    assert_eq!(e.expires_at_ms, 20);
    assert_eq!(e.user.as_ref().map(|u| u.user_id.as_str()), Some("u1"));
    assert_eq!(e.extension.get("k").map(String::as_str), Some("v"));
    assert_eq!(e.retry_count, 0);
}

//! Pins the wire format. Tokens already in users' hands and events already in broker
//! logs must keep decoding to the same values after any change to the `.proto` files.
//!
//! Two guards:
//! 1. Every field of every message and every enum value, with its number and type, is
//!    listed in `tests/golden/schema.txt`. Changing or removing a listed line breaks
//!    old data and fails here. A new field fails too until it is appended to the file
//!    (`PIN_SCHEMA=1 cargo test -p reward-proto --test wire_compat` prints the lines).
//! 2. Fixed byte strings, encoded once and committed, still decode to the same values,
//!    and encoding those values still gives the same bytes.

// Test code: a failed unwrap is a failed test, which is what we want (helpers too,
// which clippy's allow-unwrap-in-tests does not cover).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;

use prost::Message;
use prost_types::FileDescriptorSet;
use prost_types::field_descriptor_proto::{Label, Type as T};
use proto::v1::{RewardEvent, RewardToken, UserInfo};

fn type_name(field: &prost_types::FieldDescriptorProto) -> String {
    let ty = field.r#type();
    let base = match ty {
        T::Message | T::Enum => field.type_name().trim_start_matches('.').to_string(),
        other => format!("{other:?}").to_lowercase(),
    };
    let label = match field.label() {
        Label::Repeated => "repeated ",
        _ => "",
    };
    format!("{label}{base}")
}

/// One line per field and enum value: `message.field = number type`.
fn schema_lines() -> BTreeSet<String> {
    let fds =
        FileDescriptorSet::decode(proto::FILE_DESCRIPTOR_SET).expect("descriptor set decodes");
    let mut lines = BTreeSet::new();
    for file in &fds.file {
        let pkg = file.package();
        let mut stack: Vec<(String, &prost_types::DescriptorProto)> = file
            .message_type
            .iter()
            .map(|m| (format!("{pkg}.{}", m.name()), m))
            .collect();
        while let Some((path, msg)) = stack.pop() {
            for field in &msg.field {
                lines.insert(format!(
                    "{path}.{} = {} {}",
                    field.name(),
                    field.number(),
                    type_name(field)
                ));
            }
            for nested in &msg.nested_type {
                stack.push((format!("{path}.{}", nested.name()), nested));
            }
        }
        for en in &file.enum_type {
            for value in &en.value {
                lines.insert(format!(
                    "{pkg}.{}.{} = {}",
                    en.name(),
                    value.name(),
                    value.number()
                ));
            }
        }
    }
    lines
}

#[test]
fn schema_matches_pinned_field_numbers() {
    let current = schema_lines();
    if std::env::var_os("PIN_SCHEMA").is_some() {
        for line in &current {
            println!("{line}");
        }
    }
    let golden: BTreeSet<String> = include_str!("golden/schema.txt")
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(String::from)
        .collect();
    let broken: Vec<_> = golden.difference(&current).collect();
    assert!(
        broken.is_empty(),
        "fields pinned in tests/golden/schema.txt were changed or removed; this breaks \
         tokens and events already issued. Restore them: {broken:#?}"
    );
    let unpinned: Vec<_> = current.difference(&golden).collect();
    assert!(
        unpinned.is_empty(),
        "new fields are not pinned yet; append these lines to tests/golden/schema.txt: {unpinned:#?}"
    );
}

fn golden_token() -> RewardToken {
    RewardToken {
        trade_no: "cny:rain:r3:u1001".into(),
        user_id: "u1001".into(),
        activity_id: "cny".into(),
        scene_id: "rain".into(),
        reward_type: "cash".into(),
        amount: 888,
        grant_time_ms: 1_800_000_000_000,
        description: "8.88 from the rain".into(),
        expires_at_ms: 1_800_604_800_000,
        app_id: "app7".into(),
    }
}

fn golden_event() -> RewardEvent {
    RewardEvent {
        trade_no: "cny:rain:r3:u1001".into(),
        user: Some(UserInfo {
            user_id: "u1001".into(),
            device_id: "d9".into(),
            app_id: "app7".into(),
        }),
        activity_id: "cny".into(),
        scene_id: "rain".into(),
        reward_type: "cash".into(),
        amount: 888,
        extension: [("round".to_string(), "3".to_string())].into(),
        retry_count: 2,
        created_at_ms: 1_800_000_000_000,
        description: "8.88 from the rain".into(),
        not_before_ms: 1_800_000_004_000,
        expires_at_ms: 0,
        proof: Vec::new(),
    }
}

/// The same event as an SDK signs it now: its expiry and a proof (bytes made up here;
/// what a proof means is pinned by the SDK's test vectors).
fn golden_signed_event() -> RewardEvent {
    let mut proof = vec![1, 0, 7];
    proof.extend(0xa0..0xb0);
    RewardEvent {
        expires_at_ms: 1_800_604_800_000,
        proof,
        ..golden_event()
    }
}

const GOLDEN_TOKEN_HEX: &str = include_str!("golden/token.hex");
const GOLDEN_EVENT_HEX: &str = include_str!("golden/event.hex");
const GOLDEN_SIGNED_EVENT_HEX: &str = include_str!("golden/event-signed.hex");

/// Committed bytes still decode to `value`, and `value` still encodes to them.
fn assert_golden<M: Message + Default + PartialEq + std::fmt::Debug>(golden_hex: &str, value: M) {
    let bytes = hex::decode(golden_hex.trim()).expect("golden hex");
    assert_eq!(M::decode(bytes.as_slice()).unwrap(), value);
    assert_eq!(hex::encode(value.encode_to_vec()), golden_hex.trim());
}

#[test]
fn golden_token_bytes_still_decode_and_encode_identically() {
    assert_golden(GOLDEN_TOKEN_HEX, golden_token());
}

#[test]
fn golden_event_bytes_still_decode_and_encode_identically() {
    assert_golden(GOLDEN_EVENT_HEX, golden_event());
    assert_golden(GOLDEN_SIGNED_EVENT_HEX, golden_signed_event());
    // An event of an SDK that did not sign still reads: no expiry, no proof.
    let old =
        RewardEvent::decode(hex::decode(GOLDEN_EVENT_HEX.trim()).unwrap().as_slice()).unwrap();
    assert_eq!((old.expires_at_ms, old.proof.len()), (0, 0));
}

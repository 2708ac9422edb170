//! `docs/api.md`, the API's reference, is generated from the `.proto` files' comments
//! (the compiled descriptor set keeps them): this test renders it and fails when the
//! checked-in page differs, so the page never drifts from the contract.
//! `UPDATE_API_DOC=1 cargo test -p reward-proto --test api_doc` rewrites the page.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::fmt::Write as _;

use prost::Message;
use prost_types::field_descriptor_proto::{Label, Type as T};
use prost_types::{FileDescriptorProto, FileDescriptorSet};

const PAGE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/api.md");

/// The comments of each element, by its source path.
struct Comments(HashMap<Vec<i32>, String>);

impl Comments {
    fn of(file: &FileDescriptorProto) -> Self {
        let mut map = HashMap::new();
        for loc in file
            .source_code_info
            .as_ref()
            .map(|s| s.location.as_slice())
            .unwrap_or_default()
        {
            let mut text = String::new();
            for d in &loc.leading_detached_comments {
                text.push_str(&unindent(d));
                text.push('\n');
            }
            if let Some(c) = &loc.leading_comments {
                text.push_str(&unindent(c));
            }
            if let Some(c) = &loc.trailing_comments {
                if !text.is_empty() {
                    text.push('\n');
                }
                text.push_str(&unindent(c));
            }
            if !text.trim().is_empty() {
                map.insert(loc.path.clone(), text.trim_end().to_string());
            }
        }
        Comments(map)
    }

    fn get(&self, path: &[i32]) -> &str {
        self.0.get(path).map_or("", String::as_str)
    }
}

/// Drops the one space protobuf comments start with, keeps the rest of the layout.
fn unindent(c: &str) -> String {
    c.lines()
        .map(|l| l.strip_prefix(' ').unwrap_or(l))
        .collect::<Vec<_>>()
        .join("\n")
        .trim_end()
        .to_string()
}

/// A comment inside a table cell: one line.
fn cell(c: &str) -> String {
    c.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .replace('|', "\\|")
}

fn type_name(f: &prost_types::FieldDescriptorProto) -> String {
    let base = match f.r#type() {
        T::Message | T::Enum => f.type_name().trim_start_matches(".reward.v1.").to_string(),
        other => format!("{other:?}").to_lowercase(),
    };
    if f.label() == Label::Repeated {
        format!("repeated {base}")
    } else {
        base
    }
}

fn render() -> String {
    let fds = FileDescriptorSet::decode(proto::FILE_DESCRIPTOR_SET).unwrap();
    let mut out = String::from(
        "# The reward API: reference\n\n\
         Generated from the comments of `proto/proto/reward/v1/*.proto` by \
         `proto/tests/api_doc.rs` (`UPDATE_API_DOC=1 cargo test -p reward-proto --test api_doc` \
         rewrites it; the test fails when this page and the files differ). The `.proto` \
         files are the contract: generate a client from them in any language. Token \
         format: [`spec/reward-token.md`](spec/reward-token.md); event proofs: \
         [`spec/event-proof.md`](spec/event-proof.md).\n",
    );
    // The service first: it holds the contract's header.
    let mut files: Vec<&FileDescriptorProto> = fds.file.iter().collect();
    files.sort_by_key(|f| (!f.name().ends_with("service.proto"), f.name().to_string()));
    for file in files {
        let c = Comments::of(file);
        let _ = write!(out, "\n## `{}`\n", file.name());
        let head = c.get(&[12]);
        if !head.is_empty() {
            let _ = write!(out, "\n```text\n{head}\n```\n");
        }
        for (si, svc) in file.service.iter().enumerate() {
            let si = si as i32;
            let _ = write!(out, "\n### service `{}`\n\n", svc.name());
            let doc = c.get(&[6, si]);
            if !doc.is_empty() {
                let _ = writeln!(out, "{}\n", cell(doc));
            }
            out.push_str(
                "| rpc | request | response | what it does |\n| --- | --- | --- | --- |\n",
            );
            for (mi, m) in svc.method.iter().enumerate() {
                let _ = writeln!(
                    out,
                    "| `{}` | `{}` | `{}` | {} |",
                    m.name(),
                    m.input_type().trim_start_matches(".reward.v1."),
                    m.output_type().trim_start_matches(".reward.v1."),
                    cell(c.get(&[6, si, 2, mi as i32]))
                );
            }
        }
        for (ei, e) in file.enum_type.iter().enumerate() {
            let ei = ei as i32;
            let _ = write!(out, "\n### enum `{}`\n\n", e.name());
            let doc = c.get(&[5, ei]);
            if !doc.is_empty() {
                let _ = writeln!(out, "{}\n", cell(doc));
            }
            out.push_str("| value | number | meaning |\n| --- | --- | --- |\n");
            for (vi, v) in e.value.iter().enumerate() {
                let _ = writeln!(
                    out,
                    "| `{}` | {} | {} |",
                    v.name(),
                    v.number(),
                    cell(c.get(&[5, ei, 2, vi as i32]))
                );
            }
        }
        let mut stack: Vec<(String, Vec<i32>, &prost_types::DescriptorProto)> = file
            .message_type
            .iter()
            .enumerate()
            .map(|(i, m)| (m.name().to_string(), vec![4, i as i32], m))
            .collect();
        stack.reverse();
        while let Some((name, path, m)) = stack.pop() {
            let _ = write!(out, "\n### message `{name}`\n\n");
            let doc = c.get(&path);
            if !doc.is_empty() {
                let _ = writeln!(out, "{}\n", cell(doc));
            }
            if m.field.is_empty() {
                out.push_str("(no fields)\n");
            } else {
                out.push_str("| field | number | type | meaning |\n| --- | --- | --- | --- |\n");
            }
            for (fi, f) in m.field.iter().enumerate() {
                let mut fp = path.clone();
                fp.extend([2, fi as i32]);
                let _ = writeln!(
                    out,
                    "| `{}` | {} | `{}` | {} |",
                    f.name(),
                    f.number(),
                    type_name(f),
                    cell(c.get(&fp))
                );
            }
            let mut nested: Vec<_> = m
                .nested_type
                .iter()
                .enumerate()
                .filter(|(_, n)| !n.options.as_ref().is_some_and(|o| o.map_entry()))
                .map(|(i, n)| {
                    let mut np = path.clone();
                    np.extend([3, i as i32]);
                    (format!("{name}.{}", n.name()), np, n)
                })
                .collect();
            nested.reverse();
            stack.extend(nested);
        }
    }
    out
}

#[test]
fn the_api_reference_page_is_generated_from_the_proto_files() {
    let page = render();
    if std::env::var_os("UPDATE_API_DOC").is_some() {
        std::fs::write(PAGE, &page).unwrap();
    }
    let stored = std::fs::read_to_string(PAGE).unwrap_or_default();
    assert!(
        stored == page,
        "docs/api.md is not what the .proto files say; regenerate it with \
         UPDATE_API_DOC=1 cargo test -p reward-proto --test api_doc"
    );
    // The contract's parts are all there.
    for needle in [
        "authorization: Bearer",
        "INVALID_ARGUMENT",
        "| `RETRY_LATER` | 5 |",
        "LEASE_HELD",
        "STAYS DEDUCTED",
        "| `index` | 7 | `uint32` |",
        "created_at_ms",
    ] {
        assert!(page.contains(needle), "the reference lacks {needle:?}");
    }
}

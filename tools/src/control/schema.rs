//! The live knobs, in one table: every key `reward-ctl` may set, what it takes and
//! what it means. `reward-ctl --help` prints this table, and a change is checked
//! against it (the key, then the value) before the whole resulting document is
//! checked the way a running consumer and SDK check it.

use super::Known;

/// What a knob's value must be.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Kind {
    /// Credits per second: a finite number in `min..=1e9` (`min` 0 or above zero).
    Rate {
        /// Whether 0 is allowed (it means "the sum of the type rates").
        zero: bool,
    },
    /// A whole number in `min..=max`.
    Whole {
        /// Smallest allowed.
        min: i64,
        /// Largest allowed.
        max: i64,
    },
    /// `true` or `false`.
    Flag,
    /// The name of a producer in the SDK config.
    Producer,
    /// The name of a virtual queue in the SDK config.
    Queue,
    /// A topic name (no whitespace).
    Topic,
}

/// One knob: its key pattern (`<type>` a reward type, `<queue>` a virtual queue),
/// its value kind and its meaning.
#[derive(Debug, Clone, Copy)]
pub struct Knob {
    /// Dotted key; `<type>` and `<queue>` stand for a name that must exist.
    pub key: &'static str,
    /// What the value must be.
    pub kind: Kind,
    /// What it does, for `--help`.
    pub meaning: &'static str,
}

/// The highest rate a knob takes, credits per second.
pub const MAX_RATE: f64 = 1e9;
/// The highest burst a knob takes.
pub const MAX_BURST: i64 = 10_000_000;

const fn whole(min: i64, max: i64) -> Kind {
    Kind::Whole { min, max }
}

/// Every knob operators may change live.
pub const KNOBS: &[Knob] = &[
    Knob {
        key: "limits.types.<type>.rate",
        kind: Kind::Rate { zero: false },
        meaning: "credits/s the consumer lets through for the type (> 0)",
    },
    Knob {
        key: "limits.types.<type>.burst",
        kind: whole(1, MAX_BURST),
        meaning: "credits allowed at once above the rate (>= 1)",
    },
    Knob {
        key: "limits.types.<type>.priority",
        kind: whole(0, 255),
        meaning: "0..=255; higher types go first when the global limit binds",
    },
    Knob {
        key: "limits.types.<type>.fused",
        kind: Kind::Flag,
        meaning: "true: credit none of the type (parked, not lost); false: resume",
    },
    Knob {
        key: "limits.global",
        kind: Kind::Rate { zero: true },
        meaning: "credits/s over all types; 0 = the sum of the type rates",
    },
    Knob {
        key: "limits.global_burst",
        kind: whole(1, MAX_BURST),
        meaning: "global burst (>= 1)",
    },
    Knob {
        key: "limits.default_rate",
        kind: Kind::Rate { zero: false },
        meaning: "credits/s for a type the consumer config does not list",
    },
    Knob {
        key: "limits.default_burst",
        kind: whole(1, MAX_BURST),
        meaning: "burst for a type the consumer config does not list",
    },
    Knob {
        key: "queues.<queue>.ratio",
        kind: whole(0, 100),
        meaning: "0..=100: share of users (uid % 100) sent to the primary first",
    },
    Knob {
        key: "queues.<queue>.primary",
        kind: Kind::Producer,
        meaning: "producer name from the SDK config (e.g. kafka, rocketmq)",
    },
    Knob {
        key: "queues.<queue>.backup",
        kind: Kind::Producer,
        meaning: "producer name from the SDK config",
    },
    Knob {
        key: "queues.<queue>.topic",
        kind: Kind::Topic,
        meaning: "the queue's topic",
    },
    Knob {
        key: "queues.<queue>.pack_events",
        kind: whole(1, 1_000),
        meaning: "events per broker record (1: one record per event, readable by readers that do not unpack)",
    },
    Knob {
        key: "types.<type>.queue",
        kind: Kind::Queue,
        meaning: "the virtual queue a reward type goes to",
    },
    Knob {
        key: "types.<type>.max_amount",
        kind: whole(1, i64::MAX),
        meaning: "the largest amount the SDK accepts for the type",
    },
    Knob {
        key: "default_queue",
        kind: Kind::Queue,
        meaning: "queue of types without their own",
    },
];

/// The knob table as `--help` prints it.
pub fn help() -> String {
    let width = KNOBS.iter().map(|k| k.key.len()).max().unwrap_or(0);
    let mut out = String::from("Knobs (`reward-ctl set KEY VALUE`):\n");
    for k in KNOBS {
        out.push_str(&format!("  {:width$}  {}\n", k.key, k.meaning));
    }
    out
}

/// Whether `parts` fits `pattern` (a placeholder segment fits any name).
fn matches(pattern: &str, parts: &[&str]) -> bool {
    let pat: Vec<&str> = pattern.split('.').collect();
    pat.len() == parts.len()
        && pat
            .iter()
            .zip(parts)
            .all(|(p, k)| p.starts_with('<') || p == k)
}

/// The placeholder pattern (`limits.types.<type>`) that `key` without its last
/// segment matches, and the knob names under it (for "unknown knob" errors).
fn siblings(parts: &[&str]) -> Option<(Vec<&'static str>, Vec<&'static str>)> {
    let (_, prefix) = parts.split_last()?;
    let mut head_of = None;
    let mut names = Vec::new();
    for k in KNOBS {
        let pat: Vec<&'static str> = k.key.split('.').collect();
        let Some((last, head)) = pat.split_last() else {
            continue;
        };
        let same = head.len() == prefix.len()
            && head.iter().any(|p| p.starts_with('<'))
            && head
                .iter()
                .zip(prefix)
                .all(|(p, k)| p.starts_with('<') || p == k);
        if same {
            head_of = Some(head.to_vec());
            names.push(*last);
        }
    }
    head_of.map(|h| (h, names))
}

impl Known {
    /// Checks one knob's key and value on their own (the whole document is checked
    /// after); the error says what is wrong and what is allowed.
    pub fn check_knob(&self, key: &str, value: &str) -> Result<(), String> {
        let parts: Vec<&str> = key.split('.').collect();
        let Some(knob) = KNOBS.iter().find(|k| matches(k.key, &parts)) else {
            return Err(match siblings(&parts) {
                Some((head, known)) => {
                    for (p, name) in head.iter().zip(&parts) {
                        self.check_name(p, name)?;
                    }
                    format!("{key}: unknown knob ({})", known.join(", "))
                }
                None => format!("unknown setting {key:?} (reward-ctl --help lists every knob)"),
            });
        };
        for (p, name) in knob.key.split('.').zip(&parts) {
            self.check_name(p, name)?;
        }
        self.check_value(key, knob.kind, value)
    }

    /// Checks the name standing in a placeholder segment (`<type>`, `<queue>`).
    fn check_name(&self, segment: &str, name: &str) -> Result<(), String> {
        match segment {
            "<type>" if !self.types.contains(name) => Err(format!(
                "unknown reward type {name:?} (known: {})",
                Self::known_list(&self.types)
            )),
            "<queue>" => self.check_queue(name),
            _ => Ok(()),
        }
    }

    fn check_queue(&self, q: &str) -> Result<(), String> {
        if self.sdk.routing.queues.contains_key(q) {
            Ok(())
        } else {
            Err(format!(
                "unknown queue {q:?} (known: {})",
                Self::known_list(self.sdk.routing.queues.keys())
            ))
        }
    }

    fn check_value(&self, key: &str, kind: Kind, value: &str) -> Result<(), String> {
        match kind {
            Kind::Rate { zero } => match value.parse::<f64>() {
                Ok(v)
                    if v.is_finite()
                        && v <= MAX_RATE
                        && (v >= f64::MIN_POSITIVE || (zero && v == 0.0)) =>
                {
                    Ok(())
                }
                _ if zero => Err(format!(
                    "{key} = {value}: must be a rate in credits/s, 0 or above (0 = the sum of the type rates)"
                )),
                _ if key.starts_with("limits.types.") => Err(format!(
                    "{key} = {value}: must be a rate in credits/s above 0 (fuse the type to stop it)"
                )),
                _ => Err(format!(
                    "{key} = {value}: must be a rate in credits/s above 0"
                )),
            },
            Kind::Whole { min, max } => match value.parse::<i64>() {
                Ok(v) if (min..=max).contains(&v) => Ok(()),
                _ => Err(format!(
                    "{key} = {value}: must be a whole number in {min}..={max}"
                )),
            },
            Kind::Flag => match value {
                "true" | "false" => Ok(()),
                _ => Err(format!("{key} = {value}: must be true or false")),
            },
            Kind::Producer => {
                if self.sdk.producers.contains_key(value) {
                    Ok(())
                } else {
                    Err(format!(
                        "{key} = {value}: unknown producer (known: {})",
                        Self::known_list(self.sdk.producers.keys())
                    ))
                }
            }
            Kind::Queue => self.check_queue(value),
            Kind::Topic => {
                if value.is_empty() || value.contains(char::is_whitespace) {
                    Err(format!("{key}: a topic name without spaces"))
                } else {
                    Ok(())
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_match_their_patterns_and_unknown_knobs_name_their_siblings() {
        assert!(matches(
            "limits.types.<type>.rate",
            &["limits", "types", "cash", "rate"]
        ));
        assert!(!matches(
            "limits.types.<type>.rate",
            &["limits", "types", "cash"]
        ));
        assert!(!matches("limits.global", &["limits", "globals"]));
        let (head, names) = siblings(&["limits", "types", "cash", "speed"]).unwrap_or_default();
        assert_eq!(head, ["limits", "types", "<type>"]);
        assert_eq!(names, ["rate", "burst", "priority", "fused"]);
        let (_, names) = siblings(&["queues", "massive", "colour"]).unwrap_or_default();
        assert_eq!(
            names,
            ["ratio", "primary", "backup", "topic", "pack_events"]
        );
        assert!(siblings(&["limits", "nothing"]).is_none());
        // Every knob once, every knob in --help.
        let text = help();
        for k in KNOBS {
            assert_eq!(
                KNOBS.iter().filter(|o| o.key == k.key).count(),
                1,
                "{}",
                k.key
            );
            assert!(text.contains(k.key), "{}", k.key);
        }
    }
}

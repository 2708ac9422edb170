//! The marks file.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::marks::{MARKS, Marks, read_marks};
use reward_tools::books::Marked;

#[test]
fn marks_parse_and_bad_lines_are_refused() {
    let dir = std::env::temp_dir().join(format!("hosts-marks-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    assert_eq!(read_marks(&dir).unwrap(), Marks::default());
    std::fs::write(
        dir.join(MARKS),
        "a\taccepted\nb\tin_doubt\n#bound\t3\nc\tstored\nc\tin_doubt\nb\tin_doubt\n#bound\t4\nq\tin_doubt\nq\tqueued\nq\taccepted\n",
    )
    .unwrap();
    let m = read_marks(&dir).unwrap();
    assert_eq!(m.rewards.get("a"), Some(&Marked::Answered));
    assert_eq!(m.rewards.get("b"), Some(&Marked::InDoubt));
    // A repeat left in doubt never weakens a send answered as stored.
    assert_eq!(m.rewards.get("c"), Some(&Marked::Stored));
    // Held by the queue says more than answered or in doubt.
    assert_eq!(m.rewards.get("q"), Some(&Marked::Queued));
    assert_eq!((m.rewards.len(), m.bound), (4, 7));
    std::fs::write(dir.join(MARKS), "a\tmaybe\n").unwrap();
    assert!(read_marks(&dir).is_err());
    std::fs::write(dir.join(MARKS), "#bound\tmany\n").unwrap();
    assert!(read_marks(&dir).is_err());
    std::fs::write(dir.join(MARKS), "no-tab\n").unwrap();
    assert!(read_marks(&dir).is_err());
    std::fs::remove_dir_all(&dir).unwrap();
}

//! Cost of the offset window per message: track, complete (out of order, as
//! concurrent batches finish), and the periodic advance that yields the commit.
//! Baseline in the same run: a plain `VecDeque<bool>` push/flag/pop with the offset
//! as direct index (what a contiguous-offsets-only tracker without the map would cost).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::VecDeque;
use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use reward_consumer::tracker::Window;

const N: i64 = 4096;

/// Completion order: batches of 64 finishing in reverse order of start.
fn order() -> Vec<i64> {
    let mut out = Vec::with_capacity(N as usize);
    for chunk in (0..N).collect::<Vec<_>>().chunks(64).rev() {
        out.extend_from_slice(chunk);
    }
    out
}

fn bench(c: &mut Criterion) {
    let order = order();
    let mut g = c.benchmark_group("tracker");
    g.throughput(Throughput::Elements(N as u64));
    g.bench_function("window track+complete+advance (4096 msgs)", |b| {
        let mut base = 0i64;
        b.iter(|| {
            let mut w = Window::new(1, N as usize);
            for o in 0..N {
                w.track(base + o).unwrap();
            }
            let mut commits = 0;
            for (i, o) in order.iter().enumerate() {
                w.complete(1, base + o);
                if i % 256 == 255 && w.advance().is_some() {
                    commits += 1;
                }
            }
            w.advance();
            base += N;
            black_box(commits)
        });
    });
    g.bench_function("baseline VecDeque<bool> by index (4096 msgs)", |b| {
        b.iter(|| {
            let mut q: VecDeque<bool> = VecDeque::with_capacity(N as usize);
            for _ in 0..N {
                q.push_back(false);
            }
            let mut head = 0i64;
            let mut commits = 0;
            for (i, o) in order.iter().enumerate() {
                if let Some(s) = q.get_mut((o - head) as usize) {
                    *s = true;
                }
                if i % 256 == 255 {
                    while q.front() == Some(&true) {
                        q.pop_front();
                        head += 1;
                    }
                    commits += 1;
                }
            }
            black_box((commits, head))
        });
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
